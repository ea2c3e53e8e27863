"""The genetic search: operators, selection and scoring, the generation loop, re-timing (no I/O)."""
