"""creditflow inside the RL trainers users run (docs/integrations.md).

Each framework's plug-in lives in its own module and imports the framework only when that
module is imported, so ``import creditflow`` never needs them:

- ``creditflow.integrations.trl``: TRL's AsyncGRPO trains on creditflow's per-token advantages.
- ``creditflow.integrations.verl``: verl's v1 trainer (``trainer_mode=creditflow``, loaded
  through the ``verl.plugins`` entry point) does the same.

The framework-free pieces are in ``creditflow.integrations.rows`` (a training row cut into
turns, advantages aligned back onto it) and ``creditflow.integrations.bridge`` (publish,
wait for the samples, time out naming what is missing).
"""
