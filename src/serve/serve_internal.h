// serve_internal.h: what server.c (HTTP, queue, metrics) and job.c (one request through the
// engine) share: the job a request becomes and the server's counters.
#ifndef STILL_SERVE_INTERNAL_H
#define STILL_SERVE_INTERNAL_H

#include "../core/alloc.h"
#include "../gen/gen_text.h"
#include "../gen/slots.h"
#include "request.h"
#include "tool_calls.h"
#include "server.h"

#include <pthread.h>

typedef enum { JOB_QUEUED = 0, JOB_STREAMING, JOB_DONE } JobState;

// A request on its way: made by its connection thread, run by the scheduler. Reference counted:
// the connection, the queue, the scheduler's run (job_prepare to job_complete) and a streaming
// response each hold one.
typedef struct Job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    ServeRequest req;
    JobState state;
    int status;           // HTTP status of the answer once JOB_DONE (or 200 when streaming)
    char *body;           // the JSON answer (non-streaming, or an error before streaming started)
    StrBuf sse;           // server-sent events not yet read by the connection
    size_t sse_read;
    int cancelled;        // the client went away: stop generating
    int timed_out;
    double arrived, deadline;  // monotonic seconds
    char id[48];
    long created;         // unix seconds
    long prompt_tokens, completion_tokens;
    long cached_tokens;   // prompt tokens whose keys a decode slot still held (not prefilled)
} Job;

// Counters behind /metrics (under Server.mu).
typedef struct ServeMetrics {
    long requests[4];     // chat, completions, other endpoints, rejected by the queue (429)
    long errors_4xx, errors_5xx;
    long prompt_tokens, completion_tokens;
    long cancelled, timed_out;
    int running_rows;     // sequences in the decode slots now
    GenSlotsStats slots;  // the decode slots' counters (steps, rows, prefill)
} ServeMetrics;

// One request's sequences on the scheduler (job.c).
typedef struct RowOut {
    size_t sent;       // bytes of the row's text already streamed
    int n_tokens;
    int done;          // a stop string was found: nothing after `cut` is text
    size_t cut;
    int role_sent;     // (stream, chat) the chunk with the role went out
    ToolStream ts;     // (stream, tools) the text through the tool-call parser
} RowOut;

typedef struct Run {
    const ServeOptions *o;
    ServeModel *sm;
    Job *j;
    GenConfig cfg;     // the request's (on_token: job.c's, user: this run)
    TokenIds ids;      // the prompt
    GenText gt;
    RowOut *rows;      // (n)
    GenSeq *seqs;      // (n) filled by the slots
    int n;
    size_t hold;       // bytes a stream holds back: the longest stop string - 1
    int tools;         // the request has tools: a stream's text goes through the tool-call parser
    char *error;       // the slots refused a sequence: answered with this (500)
} Run;

double serve_now(void);
Job *job_new(void);
void job_unref(Job *j);
// On the scheduler thread: the prompt (chat template, tokenizer) and the GenConfig of j; NULL when
// the request is refused (j answered with 400).
Run *job_prepare(const ServeOptions *o, ServeModel *sm, Job *j);
// Its sequences have joined the slots: a stream starts.
void job_begin(Run *r);
// Every sequence of r has finished.
int run_done(const Run *r);
// The answer (JSON, the end of the stream, or an error when st != ST_OK), the metrics; frees r.
void job_complete(Run *r, Status st, const char *error, pthread_mutex_t *metrics_mu, ServeMetrics *mt);
// {"error": {"message", "type", "param", "code"}} (caller frees).
char *serve_error_json(int status, const char *message);
// Finish j with an error answer.
void job_fail(Job *j, int status, const char *message);

#endif
