"""deq-lm: sequence deep equilibrium models.

- :mod:`deq_lm.models`: the DEQ-Transformer and DEQ-TrellisNet cells, and the explicit baselines (Transformer-XL
  untied and weight-tied, unrolled TrellisNet, LSTM, GRU, TCN), all behind one interface, :class:`SequenceModel`.
- :mod:`deq_lm.data`: the copy-memory task.
- :mod:`deq_lm.configs`: named presets (``deq_lm.configs.get_config(name)``).
- ``python -m deq_lm.train`` / ``python -m deq_lm.evaluate``: training and evaluation.
"""

__version__ = "0.8.0"
