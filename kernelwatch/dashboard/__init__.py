"""The Streamlit dashboard. Reads the database through ``kernelwatch.store.queries`` only; never imports torch."""
