#!/bin/sh
# Answers the first request, then exits with status 3.
IFS= read -r line
echo 0.5
IFS= read -r line
exit 3
