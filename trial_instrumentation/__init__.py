"""trainwatch trial instrumentation: training-loop timings pushed to a Pushgateway."""
