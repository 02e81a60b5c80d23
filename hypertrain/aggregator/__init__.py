"""Outer-step math (pure), event tapes and their replay (spec/protocol.md section 7)."""
