// The gRPC methods the daemon serves: traind.v1.Trainer and
// grpc.health.v1.Health. Each handler runs on the loop thread.
#ifndef TRAIND_API_H
#define TRAIND_API_H

#include "server.h"
#include "traind.h"
#include "validate.h"

extern const srv_method api_methods[];
extern const int api_n_methods;

void api_submit(srv_call *c, ProtobufCMessage *req);
void api_get(srv_call *c, ProtobufCMessage *req);
void api_list(srv_call *c, ProtobufCMessage *req);
void api_cancel(srv_call *c, ProtobufCMessage *req);
void api_timeline(srv_call *c, ProtobufCMessage *req);
void api_watch(srv_call *c, ProtobufCMessage *req);
void api_plan(srv_call *c, ProtobufCMessage *req);
void api_export(srv_call *c, ProtobufCMessage *req);
void api_score(srv_call *c, ProtobufCMessage *req);
void api_node(srv_call *c, ProtobufCMessage *req);
void api_health_check(srv_call *c, ProtobufCMessage *req);
void api_health_watch(srv_call *c, ProtobufCMessage *req);

// At startup: removes what exports left in scratch (<state_dir>/export) when
// the daemon died in the middle of one; each export makes a new directory.
void api_export_scratch_clear(const char *scratch);

// Answers a refusal from validation.
void api_refuse(srv_call *c, const val_err *e);
// The job named by a request's job_id, or NULL after answering NOT_FOUND.
job *api_job(srv_call *c, traind *d, const char *job_id);
// The same for a request that names only a job: its strings validated
// first (val_message), a refusal answered.
job *api_job_of(srv_call *c, ProtobufCMessage *req, const char *job_id);
// Answers with the job (spec included).
void api_reply_job(srv_call *c, const job *j);
// Answers, once every write made so far is durable (daemon/commit.h), with
// the job as it is now, as a Job (submit = 0) or a SubmitJobResponse
// (submit = 1, created saying whether this call made it): what the answer
// reports is stored by the time the client hears it. The commit thread
// sends it. record: the job as job_save_keep framed it (taken; a new job's
// record precedes its "submitted" event, so last_seq is 0 there), or NULL
// to encode it here.
void api_reply_durable(srv_call *c, const job *j, int submit, int created, uint8_t *record, size_t record_n);
// A message field's value, already encoded and framed (its length, then
// the message), as an element protobuf-c packs after the message's own
// fields: for encodings made once and sent many times.
ProtobufCMessageUnknownField api_raw_field(const ProtobufCMessageDescriptor *d, const char *field, const uint8_t *framed,
                                           size_t n);

#endif
