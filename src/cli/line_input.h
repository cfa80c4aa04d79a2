// line_input.h: reading what a person types in `still chat`. On a terminal, with libedit (Debian's
// libedit, when the build found it): line editing (arrow keys, Ctrl-A/E/W...), and history
// (up / down) of this session. Elsewhere (pipes, files, or a build without libedit) plain lines.
#ifndef STILL_LINE_INPUT_H
#define STILL_LINE_INPUT_H

#include <stddef.h>

typedef enum {
    LINE_OK = 0,
    LINE_EOF,          // Ctrl-D on an empty line, or the end of the input
    LINE_INTERRUPTED,  // Ctrl-C while typing: the line is dropped
} LineStatus;

typedef struct LineInput {
    int tty;             // stdin is a terminal
    void *el, *hist;     // libedit's EditLine and History (NULL without)
    const char *prompt;
    char *buf;           // the line returned last
    size_t cap;
} LineInput;

void line_input_open(LineInput *li, const char *prompt);
// The next line without its newline in *line (valid until the next call).
LineStatus line_input_read(LineInput *li, char **line);
void line_input_add_history(LineInput *li, const char *line);
void line_input_close(LineInput *li);

#endif
