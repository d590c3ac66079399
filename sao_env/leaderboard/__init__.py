"""Leaderboards: tables (Markdown, CSV) and plots built from run directories."""
