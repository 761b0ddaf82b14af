"""Teaching labs: one folder per exercise (labs/NN-name/), checked by labs/checker."""
