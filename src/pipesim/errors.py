"""The one exception type for bad input. The CLI prints its message as one line and exits 2."""


class PipesimError(ValueError):
    """Bad input: a wrong argument, an impossible combination, a malformed file or schedule.

    The message names what is wrong and what would be right, in one line.
    """


class DeadlockError(PipesimError):
    """A schedule whose op order cannot be executed: some ops wait on each other in a cycle."""

    def __init__(self, message: str, cycle: list[tuple[int, str, str]]):
        super().__init__(message)
        #: the wait cycle as (rank, item waiting at the head of that rank, op it waits for)
        self.cycle = cycle
