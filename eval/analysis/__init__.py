"""Analysis of recorded runs: accuracy, McNemar tests, the roofline HBM model, tables and plots.

Entry point: `arc_eval.analysis.cli.report_main(argv)` (`arc-eval report RUN_DIR...`). Formulas, units
and edge-case decisions: `eval/ANALYSIS.md`.
"""

from arc_eval.analysis.accuracy import AccuracyRow, SeedOutcome, accuracy_rows, mean_and_sd
from arc_eval.analysis.errors import AnalysisError
from arc_eval.analysis.load import Dataset, RunData, load_run, load_runs
from arc_eval.analysis.mcnemar import McNemarResult, PairedComparison, PValue, compare_methods, mcnemar_test
from arc_eval.analysis.presets import HardwareSpec, ModelSpec, hardware_preset, model_preset
from arc_eval.analysis.roofline import MethodCost, TrajectoryCost, explain_trajectory, method_costs, trajectory_cost

__all__ = [
    "AccuracyRow",
    "AnalysisError",
    "Dataset",
    "HardwareSpec",
    "McNemarResult",
    "MethodCost",
    "ModelSpec",
    "PValue",
    "PairedComparison",
    "RunData",
    "SeedOutcome",
    "TrajectoryCost",
    "accuracy_rows",
    "compare_methods",
    "explain_trajectory",
    "hardware_preset",
    "load_run",
    "load_runs",
    "mcnemar_test",
    "mean_and_sd",
    "method_costs",
    "model_preset",
    "trajectory_cost",
]
