"""Start librdkafka's mock cluster (an independent Kafka implementation) and
hold it until stdin closes.

    python3 mockcluster.py TOPIC:PARTITIONS ...

librdkafka starts the cluster for any client configured with
test.mock.num.brokers=3. The mock answers no CreateTopics, so the topics are
made with its own API (rd_kafka_mock_topic_create, replication factor 3).
This talks to librdkafka through ctypes: the copy the confluent-kafka wheel
bundles (confluent_kafka.libs, in the project's Python environment), else a
system one (Debian: librdkafka1); the Python binding does not expose the
mock's API. Prints one line, the bootstrap list, then waits.
Exit status 3: librdkafka is not installed.
"""

import ctypes
import ctypes.util
import glob
import os
import sys

RD_KAFKA_PRODUCER = 0


def bundled():
    """The librdkafka the confluent-kafka wheel carries, if that package is installed."""
    try:
        import confluent_kafka
    except ImportError:
        return []
    libs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__))),
                        "confluent_kafka.libs")
    return sorted(glob.glob(os.path.join(libs, "librdkafka*.so*")))


def load():
    for name in (*bundled(), ctypes.util.find_library("rdkafka"), "librdkafka.so.1", "librdkafka.so"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    return None


def main(specs):
    lib = load()
    if lib is None:
        print("librdkafka not found", file=sys.stderr)
        return 3
    c_void_p, c_char_p, c_int, c_size_t = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    lib.rd_kafka_conf_new.restype = c_void_p
    lib.rd_kafka_conf_set.argtypes = [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]
    lib.rd_kafka_conf_set.restype = c_int
    lib.rd_kafka_new.argtypes = [c_int, c_void_p, c_char_p, c_size_t]
    lib.rd_kafka_new.restype = c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [c_void_p]
    lib.rd_kafka_handle_mock_cluster.restype = c_void_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = c_char_p
    lib.rd_kafka_mock_topic_create.argtypes = [c_void_p, c_char_p, c_int, c_int]
    lib.rd_kafka_mock_topic_create.restype = c_int
    lib.rd_kafka_err2str.argtypes = [c_int]
    lib.rd_kafka_err2str.restype = c_char_p
    lib.rd_kafka_destroy.argtypes = [c_void_p]

    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for k, v in ((b"test.mock.num.brokers", b"3"), (b"log_level", b"3")):
        if lib.rd_kafka_conf_set(conf, k, v, errstr, len(errstr)) != 0:
            print("conf %s: %s" % (k.decode(), errstr.value.decode()), file=sys.stderr)
            return 1
    rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
    if not rk:
        print("rd_kafka_new: " + errstr.value.decode(), file=sys.stderr)
        return 1
    mc = lib.rd_kafka_handle_mock_cluster(rk)
    if not mc:
        print("this librdkafka has no mock cluster", file=sys.stderr)
        return 3
    for spec in specs:
        name, parts = spec.rsplit(":", 1)
        err = lib.rd_kafka_mock_topic_create(mc, name.encode(), int(parts), 3)
        if err != 0:
            print("topic %s: %s" % (name, lib.rd_kafka_err2str(err).decode()), file=sys.stderr)
            return 1
    print(lib.rd_kafka_mock_cluster_bootstraps(mc).decode(), flush=True)
    sys.stdin.read()  # the cluster lives until stdin closes
    lib.rd_kafka_destroy(rk)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
