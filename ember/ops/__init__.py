"""Ops: one module per family. Each op's checks, shape and dtype rules and IR message live here."""
