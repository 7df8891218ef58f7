"""Differential privacy: release kinds (``releases``), the release list and its calibration
(``release_plan``), the one-off releases (``one_off``), the mechanisms and the one noise sampler
(``mechanisms``), the zCDP ledger (``ledger``) and the accountant (``accountant``)."""
