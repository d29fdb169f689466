"""Pass or fail for CI and canaries: ``check``'s result object (:mod:`~eagle3scope.gate.result`), judged
into named checks (:mod:`~eagle3scope.gate.decide`) against floors and a baseline
(:mod:`~eagle3scope.gate.baseline`), written as JUnit XML (:mod:`~eagle3scope.gate.junit`)."""
