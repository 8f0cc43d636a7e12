"""The call side: binding a call to an op's signature, selection (filter → rank → choose, with a
reason for every candidate), the dispatcher, and the eager and compiled entry points."""
