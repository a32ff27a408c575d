"""Usage: statistics, rollups, learning from use, analytics and /analytics."""
