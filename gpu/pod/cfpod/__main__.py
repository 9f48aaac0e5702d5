"""python3 -m cfpod --model DIR [flags]: serve the scorer protocol (see README.md)."""

import argparse
import os
import signal
import ssl
import sys
import threading

import torch

from .devinfo import full_float32
from .model import ModelError, dtype_from_name
from .server import Logger, Pod, make_server


def _env(name, default=None):
    return os.environ.get("CREDITFLOW_POD_" + name.upper().replace("-", "_"), default)


def _read_secret(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        raise SystemExit(f"cfpod: reading the {what} file: {e}")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="cfpod", description="creditflow scorer pod (creditflow.scorer/v1 over torch)."
                                " Every flag can also be set as CREDITFLOW_POD_<FLAG> (dashes as underscores).")
    p.add_argument("--model", default=_env("model"), help="Hugging Face model folder (config.json + *.safetensors)")
    p.add_argument("--addr", default=_env("addr", "0.0.0.0:8080"), help="listen address host:port (port 0: any free port)")
    p.add_argument("--port-file", default=_env("port_file"), help="write the port actually bound to this file")
    p.add_argument("--device", default=_env("device", "cuda" if torch.cuda.is_available() else "cpu"))
    p.add_argument("--dtype", default=_env("dtype"), help="float32, bfloat16 or float16 (default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--token-file", default=_env("token_file"), help="bearer token required on /v1/ (also env CREDITFLOW_SCORER_TOKEN)")
    p.add_argument("--admin-token-file", default=_env("admin_token_file"), help="bearer token for /v1/admin/load (default: the scorer token)")
    p.add_argument("--policy-version", type=int, default=int(_env("policy_version", "0")),
                   help="policy version when the model folder has no policy_version file")
    p.add_argument("--name", default=_env("name"), help="model name reported by /v1/info (default: the folder's base name); kept across hot loads")
    p.add_argument("--placeholder-ids", default=_env("placeholder_ids"), help='comma-separated ids of "[DELETE]" (default: from tokenizer.json)')
    p.add_argument("--watch-interval", type=float, default=float(_env("watch_interval", "0")),
                   help="seconds between checks of the model folder's policy_version file; 0 disables")
    p.add_argument("--policy-brokers", default=_env("policy_brokers"),
                   help="Kafka bootstrap brokers: follow policy announcements and hot-load each announced checkpoint "
                        "(needs confluent-kafka)")
    p.add_argument("--policy-topic", default=_env("policy_topic", "creditflow.policy"),
                   help="the compacted topic of policy announcements")
    p.add_argument("--max-request-bytes", type=int, default=int(_env("max_request_bytes", str(64 << 20))))
    p.add_argument("--max-rows", type=int, default=int(_env("max_rows", "65536")))
    p.add_argument("--max-tokens", type=int, default=int(_env("max_tokens", str(4 << 20))))
    p.add_argument("--max-concurrent", type=int, default=int(_env("max_concurrent", "64")))
    p.add_argument("--shutdown-timeout", type=float, default=float(_env("shutdown_timeout", "30")))
    p.add_argument("--tls-cert", default=_env("tls_cert"))
    p.add_argument("--tls-key", default=_env("tls_key"))
    p.add_argument("--packing", default=_env("packing"), choices=["walk", "tree"],
                   help="prefix sharing of LAPO rows: walk (depth-first over the prefix tree, one call per "
                        "edge; default on cpu) or tree (subtrees packed into calls of at most 4,096 tokens with "
                        "an ancestor mask; default on cuda)")
    p.add_argument("--attention", default=_env("attention"), choices=["sdpa", "reference"],
                   help="attention kernels: sdpa (torch's scaled_dot_product_attention with enable_gqa, the "
                        "lower-right causal bias on a cached prefix and the packs' masks; default on cuda) or "
                        "reference (float32 scores in query blocks, the Go reference's arithmetic; default on cpu)")
    p.add_argument("--threads", type=int, default=int(_env("threads", "0")), help="torch CPU threads (0: torch's default)")
    p.add_argument("--log-level", default=_env("log_level", "info"), choices=["debug", "info", "warn", "error"])
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required (a folder with config.json and *.safetensors)")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    log = Logger(a.log_level)
    # Float32 math in full float32 (NVIDIA's containers force TF32 through the environment,
    # ~1e-2 off the reference scores); bfloat16 weights are not affected.
    forced = {k: os.environ[k] for k in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
              if os.environ.get(k, "0") != "0"}
    full_float32()
    if forced:
        log.info("TF32 overrides switched off for this process", **forced)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    try:
        dtype = dtype_from_name(a.dtype or ("bfloat16" if a.device.startswith("cuda") else "float32"))
    except ValueError as e:
        log.error("cannot start", error=str(e))
        return 2
    token = _read_secret(a.token_file, "token") if a.token_file else os.environ.get("CREDITFLOW_SCORER_TOKEN", "")
    admin = _read_secret(a.admin_token_file, "admin token") if a.admin_token_file else ""
    ph = [int(x) for x in a.placeholder_ids.split(",") if x.strip()] if a.placeholder_ids else None
    host, _, port = a.addr.rpartition(":")
    try:
        pod = Pod(a.model, device=a.device, dtype=dtype, token=token, admin_token=admin,
                  policy_version=a.policy_version, name=a.name, placeholder_ids=ph,
                  max_request_bytes=a.max_request_bytes, max_rows=a.max_rows, max_tokens=a.max_tokens,
                  max_concurrent=a.max_concurrent, log=log, packing=a.packing, attention=a.attention)
    except (ModelError, OSError, ValueError) as e:
        log.error("cannot start: model load failed", error=str(e))
        return 2
    ctx = None
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
    srv = make_server(pod, host or "0.0.0.0", int(port), ctx)
    bound = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{bound}\n")
        os.replace(tmp, a.port_file)
    stop = threading.Event()
    if a.watch_interval > 0:
        pod.watch(a.watch_interval, stop)
    follower = None
    if a.policy_brokers:
        try:
            from .follow import PolicyFollower
            follower = PolicyFollower(pod, a.policy_brokers, a.policy_topic).start()
        except ImportError as e:
            log.error("cannot follow policy announcements: install confluent-kafka and the creditflow package (python/)",
                      error=str(e))
            return 2
        log.info("following policy announcements", brokers=a.policy_brokers, topic=a.policy_topic)

    def on_term(signum, frame):
        if pod.draining.is_set():
            return
        pod.draining.set()
        log.info("shutting down: draining in-flight requests", signal=signum, in_flight=pod.in_flight)

        def finish():
            drained = pod.wait_idle(a.shutdown_timeout)
            if not drained:
                log.warn("shutdown timeout reached with requests in flight", in_flight=pod.in_flight)
            stop.set()
            srv.shutdown()
        threading.Thread(target=finish, daemon=True).start()

    def on_hup(signum, frame):
        threading.Thread(target=pod.reload_from_disk, args=("SIGHUP",), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    log.info("scorer pod listening", addr=f"{host or '0.0.0.0'}:{bound}", tls=ctx is not None, auth=bool(token),
             protocol="creditflow.scorer/v1", device=a.device, dtype=str(dtype).replace("torch.", ""),
             attention="sdpa" if pod.current.model.use_sdpa else "reference", packing=pod.current.model.packing)
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()
    if follower is not None:
        follower.close()
    log.info("scorer pod stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
