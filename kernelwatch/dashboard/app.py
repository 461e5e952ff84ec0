"""KernelWatch dashboard: `kernelwatch dashboard` or `streamlit run kernelwatch/dashboard/app.py`.

Reads the database named by KERNELWATCH_DB read-only, through ``kernelwatch.store.queries`` only.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

st.set_page_config(page_title="KernelWatch", page_icon="⏱", layout="wide")
here = Path(__file__).parent / "views"  # not "pages/": that name turns on Streamlit's legacy multipage mode
pages = [
    # The default page is served at "/" only; the hidden twin serves the same script at "/triage" too, so a link
    # to /triage (the name the menu shows) is not "Page not found".
    st.Page(str(here / "triage.py"), title="Triage", url_path="landing", default=True),
    st.Page(str(here / "triage.py"), title="Triage", url_path="triage", visibility="hidden"),
    st.Page(str(here / "case.py"), title="Case", url_path="case"),
    st.Page(str(here / "overview.py"), title="Overview", url_path="overview"),
    st.Page(str(here / "performance.py"), title="Performance", url_path="performance"),
    st.Page(str(here / "accuracy.py"), title="Accuracy", url_path="accuracy"),
    st.Page(str(here / "compare.py"), title="Compare", url_path="compare"),
    st.Page(str(here / "roofline.py"), title="Roofline", url_path="roofline"),
    st.Page(str(here / "profiler.py"), title="Profiler", url_path="profiler"),
]
try:
    st.navigation(pages, position="top").run()
except Exception as exc:  # a value damaged since `kernelwatch dashboard` checked the database: one message, no trace
    from kernelwatch.dashboard.common import cannot_show

    cannot_show(exc)
