"""Clip files as users bring them, for the clip tests: a square moving across frames, written
as a video (MPEG-4 for .mp4, else MJPEG) or a NIfTI volume."""

import numpy as np


def moving_square(frames, height, width, direction):
    """uint8 [frames, height, width, 3]: a bright 6x6 square moving 3 px a frame (`direction`
    +1 right, -1 left), wrapping round."""
    clip = np.zeros((frames, height, width, 3), np.uint8)
    for index in range(frames):
        left = (index * 3 * direction) % (width - 6)
        clip[index, height // 3:height // 3 + 6, left:left + 6] = 230
    return clip


def write_video(path, clip):
    """`clip` as a video file at `path`, by OpenCV."""
    import cv2

    codec = "mp4v" if path.endswith(".mp4") else "MJPG"  # MPEG-4 Part 2, MJPEG
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*codec), 10,
                             (clip.shape[2], clip.shape[1]))
    for frame in clip:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()


def write_nifti(path, volume):
    """A depth-first volume as a NIfTI file (its slices along the scanner's third axis)."""
    import nibabel

    nibabel.save(nibabel.Nifti1Image(np.transpose(volume, (2, 1, 0)), np.eye(4)), path)
