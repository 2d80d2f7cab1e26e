"""What a run did, for people: results.tsv as report.md and progress.png (`autokernel report`)."""
