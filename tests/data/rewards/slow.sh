#!/bin/sh
# Reads one request and never answers.
IFS= read -r line
exec sleep 30
