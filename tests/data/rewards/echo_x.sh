#!/bin/sh
# A well-behaved cmd: reward: for every request line answers columns.x + 1000 * (number of
# completion ids), or null when the row has no "x"; exits at the end of its input. (The shell
# reads its input line by line; awk alone would wait for a full input block.)
while IFS= read -r line; do
  printf '%s\n' "$line" | awk '{
    x = ""
    if (match($0, /"x":-?[0-9.]+/)) x = substr($0, RSTART + 4, RLENGTH - 4)
    n = 0
    if (match($0, /"completion_ids":\[[^]]*\]/)) {
      s = substr($0, RSTART + 18, RLENGTH - 19)
      n = (s == "") ? 0 : split(s, parts, ",")
    }
    if (x == "") print "null"; else print x + 1000 * n
  }'
done
