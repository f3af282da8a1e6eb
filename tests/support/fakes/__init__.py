"""Fakes that stand in for hardware and cluster services at their own interfaces."""
