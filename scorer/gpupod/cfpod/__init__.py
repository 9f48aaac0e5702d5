"""creditflow's GPU scorer pod: the creditflow.scorer/v1 protocol over a torch
Llama-family model (see README.md).

Modules: model (Model: loading and the forward pass; the public names of the model
side are importable from here), config (checkpoint config, ModelError, InputError),
cache (key/value cache), scoring (LAPO row scores with prefix sharing), graphs (AttnSR
step graphs, blockwise attention capture); server (HTTP handling, make_server; the public
names of the server side are importable from here), protocol (request validation,
Reject), pod (Pod: current model, limits, metrics, hot loading), log (Logger), follow
(policy announcements on Kafka), metrics, safetensors; check and bench are commands."""
