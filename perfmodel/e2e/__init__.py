"""End to end: trace, predict and measure a training iteration on one rank or several."""
