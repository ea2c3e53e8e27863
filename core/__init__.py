"""AbeBot's engine: genomes, the genetic algorithm, backends, workloads and the evaluator."""
__version__ = "0.1.0"
