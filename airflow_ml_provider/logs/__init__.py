"""Reading a job's log lines in order with a resumable cursor, and what the lines say."""
