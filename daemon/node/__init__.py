"""The node agent (DaemonSet): pre-pulls task images through CRI. Not built yet."""
