"""A node with cpuManagerPolicy static: its own package, as its CPU reservation and CPU sets
would change what the other packages' pods get."""
