"""creditflow's GPU scorer pod: the creditflow.scorer/v1 protocol over a torch
Llama-family model (see README.md).

Modules: model (Model: loading, and the members it is composed of; the public names of the
model side are importable from here), forward (the forward passes over creditflow.llama, the
network the pod shares with creditflow.policy), attention (the attention kernels), config
(checkpoint config, ModelError, InputError), cache (key/value cache), scoring (row statistics:
LAPO scores with prefix sharing, entropy, kl; log-probabilities), rowplan and rowrun (prefix
sharing plans and running them), padded (the padded baseline), graphs (AttnSR step graphs,
blockwise attention capture); server (HTTP handling, make_server; the public names of the
server side are importable from here), protocol (request validation, Reject), pod (Pod:
current model, limits, metrics, hot loading), log (Logger), follow (policy announcements on
Kafka), metrics, safetensors; check and bench are commands."""
