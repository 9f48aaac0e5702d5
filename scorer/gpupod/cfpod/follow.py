"""Following policy announcements on Kafka (docs/python.md, docs/scorer-protocol.md).

The creditflow package's PolicyWatcher (python/creditflow/kafka.py) reads the compacted
policy topic from its beginning, without a consumer group's commits, and keeps the newest
announced version (the maximum seen). When it grows and the announcement names a
checkpoint, the pod loads that checkpoint with the announced version through Pod.load: the
new model is built next to the old one and swapped in between requests, so in-flight
requests finish on the model they started with and none fails; answers carry the version
that computed them. A failed load is logged and counted
(creditflow_scorer_pod_model_loads_total{result="error"}), and the old model keeps serving.
An announcement without a checkpoint (weights not published) changes nothing.

It needs the creditflow package (python/ of the repository) and confluent-kafka:
`pip install ./python "./scorer/gpupod[kafka]"`, as the pod image does (scorer/gpupod/Dockerfile).
"""

from creditflow.kafka import PolicyWatcher


class PolicyFollower(PolicyWatcher):
    """Follows `topic` on `brokers` and hot-loads announced checkpoints into `pod`.
    ``newest`` is the newest announced version (None before any), ``bad`` the number of
    undecodable values (each logged)."""

    def __init__(self, pod, brokers, topic="creditflow.policy", poll_interval=0.2, client_config=None):
        conf = {"group.id": "creditflow-scorer-pod"}
        conf.update(client_config or {})
        self.pod = pod
        super().__init__(brokers, topic, on_change=self._apply, poll_interval=poll_interval, **conf)

    @property
    def newest(self):
        return self.version

    def _on_bad(self, err):
        self.pod.log.warn("ignoring an undecodable policy announcement", topic=self.topic, error=str(err))

    def _on_read_error(self, err):
        self.pod.log.warn("policy topic read failed; retrying", error=str(err))

    def _apply(self, a):
        cur = self.pod.current
        if a["version"] <= cur.policy_version:
            return
        if not a["checkpoint"]:
            self.pod.log.info("policy announced without a checkpoint; keeping the current weights",
                              version=a["version"], serving=cur.policy_version)
            return
        self.pod.log.info("loading announced policy", version=a["version"], checkpoint=a["checkpoint"])
        try:
            self.pod.load(a["checkpoint"], a["version"])
        except Exception as e:  # noqa: BLE001 - a bad checkpoint must not stop the follower
            self.pod.log.error("announced checkpoint failed to load; the previous model keeps serving",
                               version=a["version"], checkpoint=a["checkpoint"], error=str(e))
