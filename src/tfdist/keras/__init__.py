"""The Keras fix: unmodified ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy."""
