"""KernelWatch dashboard entry point (placeholder until the pages land)."""

import os

import streamlit as st

from db.engine import open_database
from db.queries import list_runs

st.set_page_config(page_title="KernelWatch", layout="wide")
st.title("KernelWatch")
engine = open_database(os.environ.get("KERNELWATCH_DB"), readonly=True)
st.dataframe(list_runs(engine, limit=50))
