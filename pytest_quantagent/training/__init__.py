"""How the bundled model is made: the gold-playing expert, the training corpus (episodes
run through ``runner/``), training and the decision-point probes. Sits above the runner;
nothing below imports it."""
