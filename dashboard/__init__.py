"""The Streamlit dashboard. Reads the database through ``db.queries`` only; never imports torch."""
