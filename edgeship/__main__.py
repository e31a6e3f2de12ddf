from edgeship.cli import run

run()
