"""Each registered task's training part, one folder a task: its objective (`objective`), and
where it has them, its input pipeline (`pipeline`), loss (`loss`) and preset (`preset`)."""
