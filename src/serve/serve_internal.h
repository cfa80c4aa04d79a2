// serve_internal.h: what server.c (HTTP, queue, metrics) and job.c (one request through the
// engine) share: the job a request becomes and the server's counters.
#ifndef STILL_SERVE_INTERNAL_H
#define STILL_SERVE_INTERNAL_H

#include "../core/alloc.h"
#include "request.h"
#include "server.h"

#include <pthread.h>

typedef enum { JOB_QUEUED = 0, JOB_STREAMING, JOB_DONE } JobState;

// A request on its way: made by its connection thread, run by the scheduler. Reference counted:
// the connection, the queue / scheduler and a streaming response each hold one.
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
} Job;

// Counters behind /metrics (under Server.mu).
typedef struct ServeMetrics {
    long requests[4];     // chat, completions, other endpoints, rejected by the queue (429)
    long errors_4xx, errors_5xx;
    long prompt_tokens, completion_tokens;
    long cancelled, timed_out;
    int running_rows;     // sequences of the request being decoded
} ServeMetrics;

double serve_now(void);
Job *job_new(void);
void job_unref(Job *j);
// Run j on the scheduler thread: chat template, tokenizer, gen_generate; the answer (or SSE
// events) into j. rows_out receives the sequences decoded together, for the metrics.
void job_run(const ServeOptions *o, ServeModel *sm, Job *j, pthread_mutex_t *metrics_mu, ServeMetrics *mt);
// {"error": {"message", "type", "param", "code"}} (caller frees).
char *serve_error_json(int status, const char *message);
// Finish j with an error answer.
void job_fail(Job *j, int status, const char *message);

#endif
