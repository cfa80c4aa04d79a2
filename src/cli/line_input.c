// line_input.c: libedit on a terminal, getline elsewhere (see line_input.h).
#include "line_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef STILL_LIBEDIT
#include <histedit.h>

static char *prompt_of(EditLine *el) {
    LineInput *li = NULL;
    el_get(el, EL_CLIENTDATA, &li);
    return (char *)(li && li->prompt ? li->prompt : "> ");
}
#endif

void line_input_open(LineInput *li, const char *prompt) {
    memset(li, 0, sizeof *li);
    li->prompt = prompt;
    li->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
#ifdef STILL_LIBEDIT
    if (li->tty) {
        EditLine *el = el_init("still", stdin, stdout, stderr);
        History *h = history_init();
        if (el && h) {
            HistEvent ev;
            history(h, &ev, H_SETSIZE, 1000);
            history(h, &ev, H_SETUNIQUE, 1);
            el_set(el, EL_CLIENTDATA, li);
            el_set(el, EL_PROMPT, prompt_of);
            el_set(el, EL_EDITOR, "emacs");
            el_set(el, EL_HIST, history, h);
            el_set(el, EL_SIGNAL, 1);  // the terminal is restored around signals
            el_source(el, NULL);       // ~/.editrc, as other libedit programs
            li->el = el, li->hist = h;
        } else {
            if (el) el_end(el);
            if (h) history_end(h);
        }
    }
#endif
}

LineStatus line_input_read(LineInput *li, char **line) {
#ifdef STILL_LIBEDIT
    if (li->el) {
        int n = 0;
        errno = 0;
        const char *s = el_gets(li->el, &n);
        if (!s) {
            if (n < 0 && errno == EINTR) {
                el_reset(li->el);
                return LINE_INTERRUPTED;
            }
            return LINE_EOF;
        }
        size_t len = strlen(s);
        if (len + 1 > li->cap) li->buf = realloc(li->buf, li->cap = len + 1);
        memcpy(li->buf, s, len + 1);
        while (len > 0 && (li->buf[len - 1] == '\n' || li->buf[len - 1] == '\r')) li->buf[--len] = 0;
        *line = li->buf;
        return LINE_OK;
    }
#endif
    if (li->tty) {
        fputs(li->prompt ? li->prompt : "> ", stderr);
        fflush(stderr);
    }
    errno = 0;
    ssize_t n = getline(&li->buf, &li->cap, stdin);
    if (n < 0) {
        if (errno == EINTR) {
            clearerr(stdin);
            return LINE_INTERRUPTED;
        }
        return LINE_EOF;
    }
    while (n > 0 && (li->buf[n - 1] == '\n' || li->buf[n - 1] == '\r')) li->buf[--n] = 0;
    *line = li->buf;
    return LINE_OK;
}

void line_input_add_history(LineInput *li, const char *line) {
#ifdef STILL_LIBEDIT
    if (li->hist && line && *line) {
        HistEvent ev;
        history(li->hist, &ev, H_ENTER, line);
    }
#else
    (void)li, (void)line;
#endif
}

void line_input_close(LineInput *li) {
#ifdef STILL_LIBEDIT
    if (li->el) el_end(li->el);
    if (li->hist) history_end(li->hist);
#endif
    free(li->buf);
    memset(li, 0, sizeof *li);
}
