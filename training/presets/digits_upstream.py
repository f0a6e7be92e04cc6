"""digits_upstream: digits_tiny's recipe on the digits 0-4 only: the pre-training half of the
offline transfer demonstration (`digits_transfer` fine-tunes it on the digits 5-9)."""

from training.presets.digits_tiny import PRESET as DIGITS

PRESET = DIGITS.replace(name="digits_upstream", data={"classes": "0,1,2,3,4"})
