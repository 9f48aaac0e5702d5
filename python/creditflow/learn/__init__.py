"""The training loop's Python ends (docs/learn.md): rollout workers that act in the
interactive worlds (creditflow.envs) with the current policy, a trainer that takes clipped
policy-gradient steps on creditflow's per-token advantages and announces each new version,
the held-out evaluation, and the warm start that makes the starting checkpoint.

Run as modules with the system Python (Debian's python3-torch, python3-confluent-kafka,
python3-numpy): ``python3 -m creditflow.learn.worker``, ``… .trainer``, ``… .warmstart``.
`creditflow learn` starts them; they are also the code to copy into a real loop.
"""
