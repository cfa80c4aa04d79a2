#!/bin/sh
# Answers something that is not a number.
while IFS= read -r line; do echo "banana"; done
