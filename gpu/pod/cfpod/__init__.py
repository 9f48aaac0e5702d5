"""creditflow's GPU scorer pod: the creditflow.scorer/v1 protocol over a torch
Llama-family model (see README.md)."""
