"""Plans run: the primitives, the planner that builds them, and the session's backend connections."""
