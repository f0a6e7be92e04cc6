"""The `vit` command line."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="vit", description="Vision Transformer for Keras 3.")
    parser.add_argument("command", choices=["train", "evaluate", "predict", "export", "inspect",
                                            "bench"])
    args, _ = parser.parse_known_args(argv)
    print(f"vit {args.command}: not yet implemented", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
