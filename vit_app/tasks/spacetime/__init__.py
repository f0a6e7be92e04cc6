"""The space-time task's application part (clips and volumes): so far its built-in data
(`data.motion`)."""
