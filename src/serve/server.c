// server.c: HTTP on libmicrohttpd (a thread per connection), routing, API key, the bounded queue,
// the scheduler thread, /metrics and draining (see server.h). Built only when the Makefile finds
// libmicrohttpd (STILL_MICROHTTPD); without it serve_start says so.
#include "serve_internal.h"

#include "../core/fileio.h"
#include "../core/log.h"
#include "../gen/slots.h"

#include <string.h>

#ifndef STILL_MICROHTTPD

Status serve_start(const ServeOptions *o, ServeModel *sm, Server **out, Err *e) {
    *out = NULL;
    return err_set(e, ST_EUNSUPPORTED, "this still was built without libmicrohttpd (install libmicrohttpd-dev, rebuild)");
}
int serve_port(const Server *s) { return 0; }
void serve_drain_and_stop(Server *s) {}

#else

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

struct Server {
    ServeOptions o;
    ServeModel *sm;
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;       // queue changes, the scheduler going idle, requests completing
    Job **queue;             // (max_queue) ring
    int qhead, qlen;
    int running;             // requests the scheduler holds (decoding, or prepared and waiting)
    int waiting;             // of them, prepared and waiting for room in the slots (counts in the queue)
    int in_flight;           // requests between their first byte and their completion
    int stop, draining;
    unsigned long next_id;
    ServeMetrics mt;
    pthread_mutex_t mt_mu;
    pthread_t worker;
    GenSlots *slots;         // the decode slots (the scheduler's)
};

// One request's connection state (MHD's con_cls).
typedef struct Conn {
    StrBuf body;
    int too_big;
    Job *job;
} Conn;

// ---- the scheduler ---------------------------------------------------------------------------

// Answer j at once with an error: cancelled or late before it started.
static int refuse_early(Server *s, Job *j) {
    pthread_mutex_lock(&j->mu);
    int gone = j->cancelled, late = serve_now() > j->deadline;
    pthread_mutex_unlock(&j->mu);
    if (!gone && !late) return 0;
    char msg[160];
    if (gone) snprintf(msg, sizeof msg, "the client closed the connection");
    else snprintf(msg, sizeof msg, "the request waited past its %.0f s timeout (--request_timeout)", s->o.request_timeout);
    job_fail(j, gone ? 499 : 504, msg);
    pthread_mutex_lock(&s->mt_mu);
    if (gone) s->mt.cancelled++;
    else s->mt.timed_out++;
    pthread_mutex_unlock(&s->mt_mu);
    return 1;
}

// Continuous batching: requests join the slots in arrival order as soon as their sequences fit
// (gen_slots_can_join); every iteration decodes one step of every busy slot; a request whose
// sequences have all finished is answered and its slots take the next.
static void *worker_main(void *arg) {
    Server *s = arg;
    Run **active = xcalloc((size_t)s->o.max_batch, sizeof(Run *));
    int n_active = 0;
    Run *pending = NULL;  // the oldest request, prepared, waiting for room
    for (;;) {
        Job *j = NULL;
        pthread_mutex_lock(&s->mu);
        while (!pending && !s->qlen && !n_active && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!pending && !s->qlen && !n_active) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (!pending && s->qlen) {
            j = s->queue[s->qhead];
            s->qhead = (s->qhead + 1) % s->o.max_queue;
            s->qlen--;
        }
        s->running = n_active + (pending != NULL) + (j != NULL);
        s->waiting = (pending != NULL) + (j != NULL);
        pthread_mutex_unlock(&s->mu);
        if (j) {
            if (!refuse_early(s, j)) pending = job_prepare(&s->o, s->sm, j);
            job_unref(j);  // the queue's; a prepared run holds the job through its connection's
        }
        if (pending) {  // gone or late while waiting for room: answered (and counted) as such
            Job *pj = pending->j;
            pthread_mutex_lock(&pj->mu);
            if (!pj->cancelled && serve_now() > pj->deadline) pj->timed_out = 1;
            int stop = pj->cancelled || pj->timed_out;
            pthread_mutex_unlock(&pj->mu);
            if (stop) {
                job_complete(pending, ST_OK, NULL, &s->mt_mu, &s->mt);
                pending = NULL;
            }
        }
        if (pending && n_active < s->o.max_batch &&
            gen_slots_can_join(s->slots, &pending->cfg, (int)pending->ids.n, pending->n)) {
            Err e = {0};
            Status st = ST_OK;
            for (int i = 0; i < pending->n && st == ST_OK; i++)
                st = gen_slots_add(s->slots, &pending->cfg, i, pending->ids.ids, (int)pending->ids.n, &pending->seqs[i], &e);
            if (st != ST_OK) {  // rows that did join stop at their next token; the answer is the error
                pthread_mutex_lock(&pending->j->mu);
                pending->j->cancelled = 1;
                pthread_mutex_unlock(&pending->j->mu);
                for (int i = 0; i < pending->n; i++)
                    if (!pending->seqs[i].ids) pending->seqs[i].finish = GEN_FINISH_STOP;
                pending->error = xstrdup(e.msg);
                log_error("still serve: %s", e.msg);
            } else {
                job_begin(pending);
            }
            active[n_active++] = pending;
            pending = NULL;
        }
        int busy = gen_slots_step(s->slots);
        GenSlotsStats gs;
        gen_slots_stats(s->slots, &gs);
        pthread_mutex_lock(&s->mt_mu);
        s->mt.running_rows = busy;
        s->mt.slots = gs;
        pthread_mutex_unlock(&s->mt_mu);
        for (int k = 0; k < n_active;) {
            if (!run_done(active[k])) {
                k++;
                continue;
            }
            job_complete(active[k], ST_OK, NULL, &s->mt_mu, &s->mt);
            active[k] = active[--n_active];
        }
        pthread_mutex_lock(&s->mu);
        s->running = n_active + (pending != NULL);
        s->waiting = pending != NULL;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    free(active);
    return NULL;
}

// ---- responses -------------------------------------------------------------------------------

static enum MHD_Result reply(Server *s, struct MHD_Connection *c, int status, const char *type, char *body) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&s->mt_mu);
    if (status >= 400 && status < 500) s->mt.errors_4xx++;
    if (status >= 500) s->mt.errors_5xx++;
    pthread_mutex_unlock(&s->mt_mu);
    return ret;
}

static enum MHD_Result reply_json(Server *s, struct MHD_Connection *c, int status, char *body) {
    return reply(s, c, status, "application/json", body);
}

static enum MHD_Result reply_error(Server *s, struct MHD_Connection *c, int status, const char *msg) {
    return reply_json(s, c, status, serve_error_json(status, msg));
}

static char *models_json(const Server *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->o.model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "still");
    cJSON_AddNumberToObject(m, "max_model_len", s->o.max_cache_len);
    cJSON_AddItemToArray(data, m);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

static char *metrics_text(Server *s) {
    pthread_mutex_lock(&s->mu);
    int qlen = s->qlen + s->waiting, running = s->running - s->waiting, in_flight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->mt_mu);
    ServeMetrics m = s->mt;
    pthread_mutex_unlock(&s->mt_mu);
    StrBuf sb = {0};
    static const char *endpoints[] = {"chat_completions", "completions", "other"};
    sb_puts(&sb, "# HELP still_requests_total Requests received, by endpoint.\n# TYPE still_requests_total counter\n");
    for (int i = 0; i < 3; i++) sb_printf(&sb, "still_requests_total{endpoint=\"%s\"} %ld\n", endpoints[i], m.requests[i]);
    sb_printf(&sb,
              "# HELP still_requests_rejected_total Requests refused with 429 because the queue was full.\n"
              "# TYPE still_requests_rejected_total counter\nstill_requests_rejected_total %ld\n"
              "# HELP still_errors_total Error answers, by class.\n# TYPE still_errors_total counter\n"
              "still_errors_total{class=\"4xx\"} %ld\nstill_errors_total{class=\"5xx\"} %ld\n"
              "# HELP still_requests_cancelled_total Requests whose client went away before the answer.\n"
              "# TYPE still_requests_cancelled_total counter\nstill_requests_cancelled_total %ld\n"
              "# HELP still_requests_timed_out_total Requests stopped by --request_timeout.\n"
              "# TYPE still_requests_timed_out_total counter\nstill_requests_timed_out_total %ld\n"
              "# HELP still_prompt_tokens_total Prompt tokens prefilled.\n"
              "# TYPE still_prompt_tokens_total counter\nstill_prompt_tokens_total %ld\n"
              "# HELP still_generation_tokens_total Tokens generated.\n"
              "# TYPE still_generation_tokens_total counter\nstill_generation_tokens_total %ld\n"
              "# HELP still_queue_depth Requests waiting for the scheduler.\n"
              "# TYPE still_queue_depth gauge\nstill_queue_depth %d\n"
              "# HELP still_requests_running Requests whose sequences are in the decode slots.\n"
              "# TYPE still_requests_running gauge\nstill_requests_running %d\n"
              "# HELP still_requests_in_flight Requests received and not yet answered.\n"
              "# TYPE still_requests_in_flight gauge\nstill_requests_in_flight %d\n"
              "# HELP still_batch_slots Sequences decoded together at most (--max_batch).\n"
              "# TYPE still_batch_slots gauge\nstill_batch_slots %d\n"
              "# HELP still_batch_occupancy Sequences being decoded now over the slots.\n"
              "# TYPE still_batch_occupancy gauge\nstill_batch_occupancy %.4f\n"
              "# HELP still_decode_steps_total Decode steps run (every busy slot one token).\n"
              "# TYPE still_decode_steps_total counter\nstill_decode_steps_total %ld\n"
              "# HELP still_decode_rows_total Busy slots summed over the decode steps (/ steps: mean occupancy).\n"
              "# TYPE still_decode_rows_total counter\nstill_decode_rows_total %ld\n"
              "# HELP still_decode_rows_computed_total Rows the decode steps computed (the busy slots' buckets).\n"
              "# TYPE still_decode_rows_computed_total counter\nstill_decode_rows_computed_total %ld\n"
              "# HELP still_prefill_tokens_total Prompt tokens run through prefill (not those reused from a slot's cache).\n"
              "# TYPE still_prefill_tokens_total counter\nstill_prefill_tokens_total %ld\n",
              m.requests[3], m.errors_4xx, m.errors_5xx, m.cancelled, m.timed_out, m.prompt_tokens,
              m.completion_tokens, qlen, running, in_flight, s->o.max_batch,
              (double)m.running_rows / s->o.max_batch, m.slots.decode_steps, m.slots.busy_rows, m.slots.decode_rows,
              m.slots.prefill_tokens);
    return sb_take(&sb);
}

// ---- SSE ---------------------------------------------------------------------------------------

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    Job *j = cls;
    pthread_mutex_lock(&j->mu);
    double t0 = serve_now();
    while (j->sse_read == j->sse.len && j->state != JOB_DONE) {
        if (serve_now() - t0 > 5) {  // a comment line: keeps proxies open, shows a closed client
            pthread_mutex_unlock(&j->mu);
            static const char ping[] = ": keep-alive\n\n";
            size_t n = MIN(max, sizeof ping - 1);
            memcpy(buf, ping, n);
            return (ssize_t)n;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    ssize_t ret = MHD_CONTENT_READER_END_OF_STREAM;
    if (j->sse_read < j->sse.len) {
        size_t n = MIN(max, j->sse.len - j->sse_read);
        memcpy(buf, j->sse.data + j->sse_read, n);
        j->sse_read += n;
        if (j->sse_read == j->sse.len) j->sse.len = j->sse_read = 0;
        ret = (ssize_t)n;
    }
    pthread_mutex_unlock(&j->mu);
    return ret;
}

static void sse_free(void *cls) {
    Job *j = cls;
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;  // the response is gone: nobody reads what would come next
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

// ---- requests ----------------------------------------------------------------------------------

// The peer closed its end (a read would return 0).
static int peer_closed(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result generate(Server *s, struct MHD_Connection *c, Conn *cn, ServeKind kind) {
    pthread_mutex_lock(&s->mt_mu);
    s->mt.requests[kind]++;
    pthread_mutex_unlock(&s->mt_mu);
    if (cn->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "body: more than %zu bytes (--max_body)", s->o.max_body);
        return reply_error(s, c, 413, msg);
    }
    Job *j = job_new();
    cn->job = j;
    Err e = {0};
    if (serve_request_parse(kind, cn->body.data, cn->body.len, &j->req, &e) != ST_OK) return reply_error(s, c, 400, e.msg);
    if (!s->sm->tok) return reply_error(s, c, 400, "the model has no tokenizer.json: text requests cannot be served");
    j->arrived = serve_now();
    j->deadline = j->arrived + s->o.request_timeout;
    pthread_mutex_lock(&s->mu);
    snprintf(j->id, sizeof j->id, "%s%016lx", kind == SERVE_CHAT ? "chatcmpl-" : "cmpl-", ++s->next_id);
    int draining = s->draining, full = s->qlen + s->waiting >= s->o.max_queue;
    if (!draining && !full) {
        s->queue[(s->qhead + s->qlen) % s->o.max_queue] = j;
        s->qlen++;
        j->refs++;  // the queue's
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (draining) return reply_error(s, c, 503, "the server is shutting down");
    if (full) {
        pthread_mutex_lock(&s->mt_mu);
        s->mt.requests[3]++;
        pthread_mutex_unlock(&s->mt_mu);
        char msg[128];
        snprintf(msg, sizeof msg, "the queue is full (%d requests waiting, --max_queue); retry later", s->o.max_queue);
        return reply_error(s, c, 429, msg);
    }
    // wait for the answer (or, streaming, for its start), watching for the client going away
    pthread_mutex_lock(&j->mu);
    while (j->state == JOB_QUEUED || (j->state == JOB_STREAMING && !j->req.stream)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->state != JOB_DONE && peer_closed(c)) {
            j->cancelled = 1;
            pthread_mutex_unlock(&j->mu);
            return MHD_NO;  // close: nobody is listening
        }
    }
    if (j->state == JOB_DONE && j->body) {
        int status = j->status;
        char *body = j->body;
        j->body = NULL;
        pthread_mutex_unlock(&j->mu);
        return reply_json(s, c, status, body);
    }
    j->refs++;  // the response's
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, j, sse_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static int authorised(const Server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, s->o.api_key);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *size, void **con_cls) {
    Server *s = cls;
    Conn *cn = *con_cls;
    if (!cn) {
        cn = xcalloc(1, sizeof *cn);
        *con_cls = cn;
        pthread_mutex_lock(&s->mu);
        s->in_flight++;
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    if (*size) {
        if (cn->body.len + *size > s->o.max_body) cn->too_big = 1;
        else sb_append(&cn->body, data, *size);
        *size = 0;
        return MHD_YES;
    }
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    int chat = !strcmp(url, "/v1/chat/completions"), compl = !strcmp(url, "/v1/completions");
    if (!chat && !compl) {
        pthread_mutex_lock(&s->mt_mu);
        s->mt.requests[2]++;
        pthread_mutex_unlock(&s->mt_mu);
    }
    if (!strcmp(url, "/health")) {
        pthread_mutex_lock(&s->mu);
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        return reply_json(s, c, draining ? 503 : 200, xstrdup(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}"));
    }
    if (!strcmp(url, "/metrics")) return reply(s, c, 200, "text/plain; version=0.0.4", metrics_text(s));
    if (strncmp(url, "/v1/", 4)) return reply_error(s, c, 404, "no such endpoint (POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics)");
    if (!authorised(s, c)) return reply_error(s, c, 401, "missing or wrong API key (Authorization: Bearer KEY)");
    if (!strcmp(url, "/v1/models")) {
        if (!get) return reply_error(s, c, 405, "GET /v1/models");
        return reply_json(s, c, 200, models_json(s));
    }
    if (chat || compl) {
        if (!post) return reply_error(s, c, 405, "use POST");
        return generate(s, c, cn, chat ? SERVE_CHAT : SERVE_COMPLETION);
    }
    return reply_error(s, c, 404, "no such endpoint (POST /v1/chat/completions, POST /v1/completions, GET /v1/models)");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Server *s = cls;
    Conn *cn = *con_cls;
    if (!cn) return;
    if (cn->job) {
        pthread_mutex_lock(&cn->job->mu);
        if (cn->job->state != JOB_DONE) cn->job->cancelled = 1;
        pthread_mutex_unlock(&cn->job->mu);
        job_unref(cn->job);
    }
    sb_free(&cn->body);
    free(cn);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

// ---- start and stop ----------------------------------------------------------------------------

Status serve_start(const ServeOptions *o, ServeModel *sm, Server **out, Err *e) {
    *out = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    const char *host = !strcmp(o->host, "localhost") ? "127.0.0.1" : o->host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return err_set(e, ST_EINVAL, "--host %s: expected an IPv4 address (127.0.0.1, 0.0.0.0)", o->host);
    if (o->port < 0 || o->port > 65535) return err_set(e, ST_EINVAL, "--port %d: expected 0..65535", o->port);
    if (o->max_batch < 1) return err_set(e, ST_EINVAL, "--max_batch %d: must be at least 1", o->max_batch);
    if (o->max_queue < 1) return err_set(e, ST_EINVAL, "--max_queue %d: must be at least 1", o->max_queue);
    if (o->max_cache_len < 2) return err_set(e, ST_EINVAL, "--max_cache_len %d: must be at least 2", o->max_cache_len);
    if (!(o->request_timeout > 0)) return err_set(e, ST_EINVAL, "--request_timeout: must be positive");
    Server *s = xcalloc(1, sizeof *s);
    s->o = *o;
    s->sm = sm;
    s->queue = xcalloc((size_t)o->max_queue, sizeof(Job *));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->mt_mu, NULL);
    Status st = gen_slots_open(sm->m, o->max_batch, o->max_cache_len, &s->slots, e);
    if (st == ST_OK) gen_slots_set_prefix_reuse(s->slots, o->prefix_reuse);
    if (st != ST_OK) {
        free(s->queue);
        free(s);
        return st;
    }
    pthread_create(&s->worker, NULL, worker_main, s);
    unsigned limit = (unsigned)(o->max_queue + o->max_batch + 64);
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                MHD_USE_ERROR_LOG,
                            (uint16_t)o->port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, &addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_END);
    if (!s->d) {
        int err = errno;
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->worker, NULL);
        gen_slots_close(s->slots);
        free(s->queue);
        free(s);
        return err_set(e, ST_EIO, "cannot listen on %s:%d: %s", o->host, o->port, strerror(err));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (o->port_file) {
        char buf[16];
        int n = snprintf(buf, sizeof buf, "%d\n", s->port);
        st = file_write_atomic(o->port_file, buf, (size_t)n, e);
        if (st != ST_OK) {
            serve_drain_and_stop(s);
            return st;
        }
    }
    *out = s;
    return ST_OK;
}

int serve_port(const Server *s) { return s->port; }

void serve_drain_and_stop(Server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    MHD_socket ls = MHD_quiesce_daemon(s->d);  // no new connections
    if (ls != MHD_INVALID_SOCKET) close(ls);
    double until = serve_now() + s->o.request_timeout + 5;
    pthread_mutex_lock(&s->mu);
    while ((s->qlen || s->running || s->in_flight) && serve_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    MHD_stop_daemon(s->d);
    gen_slots_close(s->slots);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mt_mu);
    free(s);
}

#endif
