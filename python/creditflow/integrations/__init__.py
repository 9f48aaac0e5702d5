"""creditflow inside the RL trainers users run (docs/integrations.md).

Each framework's plug-in lives in its own module and imports the framework only when that
module is imported, so ``import creditflow`` never needs them:

- ``creditflow.integrations.trl``: TRL's AsyncGRPO trains on creditflow's per-token advantages.

The framework-free pieces (a training row cut into turns, advantages aligned back onto it)
are in ``creditflow.integrations.rows``.
"""
