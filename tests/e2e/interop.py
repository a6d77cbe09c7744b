#!/usr/bin/env python3
"""An independent client of traind, written from traind.proto alone: the
message classes come from the descriptor set that protoc compiles from the
.proto (build/proto/traind.desc), the calls from a gRPC library that is not
traind's client: grpclib (pure Python over h2, no code shared with the gRPC
C core) or grpcio (the C core's Python binding, built by its PyPI wheel).

usage: interop.py grpclib|grpcio DESCRIPTOR_SET SOCKET TRAIN_FILE

Checks: grpc.health.v1 Check answers SERVING; SubmitJob queues a job;
WatchJob streams its events; CancelJob stops it while it trains; the stream
ends with the job CANCELLED. Exits 0 when all hold, 1 when one does not,
3 when protobuf or the library cannot be imported: the test runs this on the
project's venv (tests/requirements.txt), so that means the machine is not set
up, which fails the test rather than skipping it.
"""
import sys

EXIT_NOT_SET_UP = 3


def not_set_up(package, e):
    print(f"interop: {sys.executable} cannot import {package} ({e}); run deploy/install-deps.sh", file=sys.stderr)
    return EXIT_NOT_SET_UP


def message_classes(desc_path):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet.FromString(open(desc_path, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)

    def cls(name):
        d = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(d)
        return message_factory.MessageFactory(pool).GetPrototype(d)

    return cls


def submit_request(cls, train_file, request_id):
    from google.protobuf import json_format

    spec = {
        "name": "interop",
        "model": {"config": {"arch": "ARCH_QWEN3", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                             "intermediate_size": 176, "max_position_embeddings": 512}},
        "data": {"train_path": train_file},
        "training": {"steps": 100000, "batch_size": 4, "seq_len": 64, "lr": 3e-3, "warmup_steps": 5},
        "checkpoints": {"every_steps": 1000},
        "seed": 7,
    }
    return json_format.ParseDict({"request_id": request_id, "spec": spec}, cls("traind.v1.SubmitJobRequest")())


def check(cond, what):
    if not cond:
        print(f"interop: {what}", file=sys.stderr)
        sys.exit(1)


CANCELLED = 5  # JobState.JOB_STATE_CANCELLED
SERVING = 1


def run_grpclib(cls, sock, train_file):
    try:
        import asyncio
        from grpclib.client import Channel, UnaryStreamMethod, UnaryUnaryMethod
    except ImportError as e:
        return not_set_up("grpclib", e)

    async def main():
        ch = Channel(path=sock)
        try:
            def unary(name, req, resp):
                return UnaryUnaryMethod(ch, name, cls(req), cls(resp))

            check_ = unary("/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest",
                           "grpc.health.v1.HealthCheckResponse")
            h = await check_(cls("grpc.health.v1.HealthCheckRequest")())
            check(h.status == SERVING, f"health: {h.status}")
            submit = unary("/traind.v1.Trainer/SubmitJob", "traind.v1.SubmitJobRequest", "traind.v1.SubmitJobResponse")
            resp = await submit(submit_request(cls, train_file, "grpclib-1"))
            job = resp.job.id
            again = await submit(submit_request(cls, train_file, "grpclib-1"))
            check(again.job.id == job and not again.created, "the retry made another job")
            cancel = unary("/traind.v1.Trainer/CancelJob", "traind.v1.CancelJobRequest", "traind.v1.Job")
            watch = UnaryStreamMethod(ch, "/traind.v1.Trainer/WatchJob", cls("traind.v1.WatchJobRequest"),
                                      cls("traind.v1.JobEvent"))
            last_state, steps, seqs = None, 0, []
            async with watch.open() as stream:
                await stream.send_message(cls("traind.v1.WatchJobRequest")(job_id=job), end=True)
                async for ev in stream:
                    seqs.append(ev.seq)
                    kind = ev.WhichOneof("kind")
                    if kind == "step":
                        steps += 1
                        if steps == 3:
                            await cancel(cls("traind.v1.CancelJobRequest")(job_id=job))
                    elif kind == "state":
                        last_state = ev.state.state
            check(last_state == CANCELLED, f"the job ended in state {last_state}")
            check(seqs == list(range(1, len(seqs) + 1)), f"sequence numbers {seqs}")
            print(f"grpclib: health SERVING, submitted {job}, watched {len(seqs)} events, cancelled it")
        finally:
            ch.close()

    asyncio.run(main())
    return 0


def run_grpcio(cls, sock, train_file):
    try:
        import grpc
    except ImportError as e:
        return not_set_up("grpcio", e)
    ch = grpc.insecure_channel("unix:" + sock)

    def unary(name, resp):
        return ch.unary_unary(name, request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=cls(resp).FromString)

    h = unary("/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckResponse")(
        cls("grpc.health.v1.HealthCheckRequest")(), timeout=10)
    check(h.status == SERVING, f"health: {h.status}")
    resp = unary("/traind.v1.Trainer/SubmitJob", "traind.v1.SubmitJobResponse")(
        submit_request(cls, train_file, "grpcio-1"), timeout=10)
    job = resp.job.id
    try:
        unary("/traind.v1.Trainer/GetJob", "traind.v1.Job")(cls("traind.v1.GetJobRequest")(job_id="no/such"), timeout=10)
        check(False, "GetJob of a malformed id succeeded")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "job_id" in e.details(), f"GetJob: {e}")
    watch = ch.unary_stream("/traind.v1.Trainer/WatchJob", request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=cls("traind.v1.JobEvent").FromString)
    cancel = unary("/traind.v1.Trainer/CancelJob", "traind.v1.Job")
    last_state, steps, seqs = None, 0, []
    for ev in watch(cls("traind.v1.WatchJobRequest")(job_id=job), timeout=120):
        seqs.append(ev.seq)
        kind = ev.WhichOneof("kind")
        if kind == "step":
            steps += 1
            if steps == 3:
                cancel(cls("traind.v1.CancelJobRequest")(job_id=job), timeout=10)
        elif kind == "state":
            last_state = ev.state.state
    check(last_state == CANCELLED, f"the job ended in state {last_state}")
    check(seqs == list(range(1, len(seqs) + 1)), f"sequence numbers {seqs}")
    ch.close()
    print(f"grpcio: health SERVING, submitted {job}, watched {len(seqs)} events, cancelled it")
    return 0


def main(argv):
    if len(argv) != 5 or argv[1] not in ("grpclib", "grpcio"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        cls = message_classes(argv[2])
    except ImportError as e:
        return not_set_up("protobuf", e)
    run = run_grpclib if argv[1] == "grpclib" else run_grpcio
    return run(cls, argv[3], argv[4])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
