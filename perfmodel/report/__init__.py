"""The perfmodel report: plots and one self-contained HTML file from stored results.

``build_report(results_root)`` writes ``results/<device-key>/report/index.html``
(and each figure as PNG beside it) from what a run stored: measurements, the
fitted predictors, E2E records, traces and the gate's baseline. Nothing is
measured. matplotlib is imported only while the figures are drawn.
"""

from perfmodel.report.build import build_report, default_report_path
from perfmodel.report.data import ReportError

__all__ = ["ReportError", "build_report", "default_report_path"]
