"""Pictures of timelines: the terminal table here; charts, HTML and traces in siblings."""
