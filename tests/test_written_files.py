"""`vit predict`'s files beside its table: named after each image, never written over a file
that is there without --overwrite."""

import pytest

from vit_app.inference import written_files


def test_images_of_one_stem_get_numbered_stems():
    readable = [("a/cell.png", b""), ("b/cell.png", b""), ("c/cell.jpg", b""), ("d.png", b"")]
    assert written_files.image_stems(readable) == ["cell", "cell_2", "cell_3", "d"]


def test_existing_files_are_named_and_overwrite_lets_them_be_replaced(tmp_path):
    planned = [str(tmp_path / f"{index}.png") for index in range(8)]
    for path in planned[:7]:
        open(path, "w").close()
    with pytest.raises(ValueError, match=r"--masks .*: 7 of the 8 files this run would write "
                       r"exist already \(0.png, 1.png, 2.png, 3.png, 4.png and 2 more\); "
                       r"nothing was written"):
        written_files.refuse_to_overwrite(planned, "--masks", str(tmp_path), overwrite=False)
    written_files.refuse_to_overwrite(planned, "--masks", str(tmp_path), overwrite=True)
    written_files.refuse_to_overwrite(planned[7:], "--masks", str(tmp_path), overwrite=False)
