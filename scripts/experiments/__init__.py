"""One-off measurement tools of past investigations (README.md: what each fed)."""
