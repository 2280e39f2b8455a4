"""``python -m scripts.soak``: an endurance run of the camera daemon, faults on a schedule;
the tool is scripts.support.soak (its parts are tested there)."""
