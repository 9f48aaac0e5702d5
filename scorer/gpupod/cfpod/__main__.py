"""python3 -m cfpod --model DIR [flags]: serve the scorer protocol (see README.md)."""

import argparse
import os
import signal
import sys
import threading
import time

import torch

from .devinfo import full_float32
from .health import EXIT_ACCELERATOR, Health
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
    p.add_argument("--token-file", default=_env("token_file"),
                   help="bearer token required on /v1/ (also env CREDITFLOW_SCORER_TOKEN); required unless "
                        "--insecure-no-token")
    p.add_argument("--insecure-no-token", action="store_true",
                   default=_env("insecure_no_token", "") in ("1", "true"),
                   help="serve /v1/ without a bearer token (only on a network nobody else reaches)")
    p.add_argument("--admin-token-file", default=_env("admin_token_file"),
                   help="bearer token for /v1/admin/load, never the scoring token; without it the admin "
                        "endpoint answers 403")
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
    p.add_argument("--max-context", type=int, default=int(_env("max_context", "0")),
                   help="cap the model's context at this many tokens (0: max_position_embeddings)")
    p.add_argument("--max-request-bytes", type=int, default=int(_env("max_request_bytes", str(64 << 20))))
    p.add_argument("--max-rows", type=int, default=int(_env("max_rows", "65536")))
    p.add_argument("--max-tokens", type=int, default=int(_env("max_tokens", str(4 << 20))))
    p.add_argument("--max-concurrent", type=int, default=int(_env("max_concurrent", "64")))
    p.add_argument("--shutdown-timeout", type=float, default=float(_env("shutdown_timeout", "30")),
                   help="seconds requests in flight get to finish after SIGTERM")
    p.add_argument("--keep-alive-timeout", type=float, default=float(_env("keep_alive_timeout", "120")),
                   help="seconds an idle keep-alive connection stays open (longer than the clients' idle timeout)")
    p.add_argument("--liveness-interval", type=float, default=float(_env("liveness_interval", "10")),
                   help="/livez: a model call that succeeded within this many seconds proves the model alive; "
                        "older, /livez runs a canary forward")
    p.add_argument("--canary-timeout", type=float, default=float(_env("canary_timeout", "5")),
                   help="/livez fails when its canary forward does not finish within this many seconds")
    p.add_argument("--stall-timeout", type=float, default=float(_env("stall_timeout", "300")),
                   help="/livez and /healthz fail while one model call has run longer than this many seconds")
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


def _usage(msg):
    print(f"cfpod: {msg}", file=sys.stderr)
    return 2


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    log = Logger(a.log_level)
    token = _read_secret(a.token_file, "token") if a.token_file else os.environ.get("CREDITFLOW_SCORER_TOKEN", "")
    if a.token_file and not token:
        return _usage(f"the token file {a.token_file} is empty")
    if not token and not a.insecure_no_token:
        return _usage("no scoring token: pass --token-file (or set CREDITFLOW_SCORER_TOKEN), or --insecure-no-token "
                      "to serve without one")
    if token and a.insecure_no_token:
        return _usage("--insecure-no-token with a scoring token: pass one or the other")
    admin = _read_secret(a.admin_token_file, "admin token") if a.admin_token_file else ""
    if a.admin_token_file and not admin:
        return _usage(f"the admin token file {a.admin_token_file} is empty")
    if admin and admin == token:
        log.warn("the admin token equals the scoring token: every client that scores can also load models")
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
    ph = [int(x) for x in a.placeholder_ids.split(",") if x.strip()] if a.placeholder_ids else None
    host, _, port = a.addr.rpartition(":")
    host = (host or "0.0.0.0").strip("[]")
    health = Health(log, interval=a.liveness_interval, canary_timeout=a.canary_timeout, stall=a.stall_timeout)
    fatal = threading.Event()
    health.on_fatal = lambda msg: fatal.set()
    try:
        pod = Pod(a.model, device=a.device, dtype=dtype, token=token, admin_token=admin,
                  policy_version=a.policy_version, name=a.name, placeholder_ids=ph,
                  max_request_bytes=a.max_request_bytes, max_rows=a.max_rows, max_tokens=a.max_tokens,
                  max_concurrent=a.max_concurrent, log=log, packing=a.packing,
                  max_context=a.max_context, health=health, attention=a.attention)
    except (ModelError, OSError, ValueError) as e:
        log.error("cannot start: model load failed", error=str(e))
        return 2
    except Exception as e:  # noqa: BLE001 - the model's first forward failed (health.py)
        log.error("cannot start: the model's first forward failed", error=f"{type(e).__name__}: {e}")
        return EXIT_ACCELERATOR if health.broken else 1
    try:
        srv = make_server(pod, host, int(port), a.tls_cert, a.tls_key, a.keep_alive_timeout)
    except (OSError, ValueError) as e:
        log.error("cannot start: listening failed", addr=a.addr, error=str(e))
        return 1
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

    term = threading.Event()

    def on_term(signum, frame):
        if not pod.draining.is_set():
            pod.draining.set()
            log.info("shutting down: draining in-flight requests", signal=signum, in_flight=pod.in_flight)
        term.set()

    def on_hup(signum, frame):
        threading.Thread(target=pod.reload_from_disk, args=("SIGHUP",), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    http = threading.Thread(target=srv.serve_forever, name="cfpod-http", daemon=True)
    http.start()
    log.info("scorer pod listening", addr=f"{host}:{bound}", tls=bool(a.tls_cert), auth=bool(token),
             admin=bool(admin), protocol="creditflow.scorer/v1", device=a.device,
             dtype=str(dtype).replace("torch.", ""), server="uvicorn",
             attention="sdpa" if pod.current.model.use_sdpa else "reference", packing=pod.current.model.packing)
    while not (term.is_set() or fatal.is_set()) and http.is_alive():
        term.wait(0.2)
    status = 0
    if fatal.is_set():
        # Every later model call would fail: answer what is in flight (503s for new work),
        # then exit non-zero so that the pod is restarted; never hang on a wedged device.
        status = EXIT_ACCELERATOR
        grace = min(a.shutdown_timeout, 10.0)
        watchdog = threading.Timer(grace + 10.0, os._exit, args=(EXIT_ACCELERATOR,))
        watchdog.daemon = True
        watchdog.start()
        pod.wait_idle(grace)
        srv.shutdown(1.0)
    elif term.is_set():
        deadline = time.monotonic() + a.shutdown_timeout
        if not pod.wait_idle(a.shutdown_timeout):
            log.warn("shutdown timeout reached with requests in flight", in_flight=pod.in_flight)
        # Answers of drained requests are written by now; what is left is idle keep-alive
        # connections (a TLS close waits for the client's close_notify) and admin loads.
        srv.shutdown(max(0.5, min(5.0, deadline - time.monotonic())))
    else:
        log.error("the HTTP server stopped unexpectedly")
        status = 1
    stop.set()
    srv.server_close()
    if follower is not None:
        follower.close()
    if status == EXIT_ACCELERATOR:
        log.error("scorer pod exits after an unrecoverable accelerator error", exit_status=status,
                  error=pod.health.broken)
    else:
        log.info("scorer pod stopped", exit_status=status)
    return status


if __name__ == "__main__":
    sys.exit(main())
