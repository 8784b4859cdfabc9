"""
The heat kernel: spectral-clustering quality, with a predict
============================================================

The Gaussian (rbf) kernel compares points by their distance in the input space.
The **heat kernel** compares them through the k-nearest-neighbour graph of the
data: K = exp(-t L), L the normalised Laplacian of the graph, so two points are
close when heat diffuses quickly from one to the other along the graph. Kernel
k-means with it is clustering in diffusion-map space, which is what spectral
clustering does, and it follows curved and elongated clusters that no width of
the rbf kernel separates.

``KernelKMeans(kernel="heat")`` needs nothing else: the number of neighbours of the
graph (10, 20 or 40) is chosen by the eigengap of its Laplacian, the kernel is kept
as its top eigenpairs (the rank is chosen, with an error bound),
and the diffusion time t is chosen without labels (``t="auto"``). Unlike
scikit-learn's :class:`~sklearn.cluster.SpectralClustering`, the fitted model
labels new points: they join the graph through their nearest fitted points.
The heat kernel is kept as an (n, rank) matrix of features, so the full-batch
:class:`~mbkkm.KernelKMeans` is the fast estimator for it (Lloyd on those
features); :class:`~mbkkm.MiniBatchKernelKMeans` gives the same clusters, slower.

Here the three side by side on rings, moons and scikit-learn's handwritten digits.
"""

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import SpectralClustering
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler

from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.datasets import make_circles, make_moons


def methods(k):
    return {
        "rbf (width chosen)": MiniBatchKernelKMeans(k, random_state=0),
        "heat (t chosen)": KernelKMeans(k, kernel="heat", random_state=0),
        "SpectralClustering": SpectralClustering(
            k, affinity="nearest_neighbors", n_neighbors=10, random_state=0
        ),
    }


shapes = {
    "rings": make_circles(n_samples=1500, factor=0.4, noise=0.06, random_state=0),
    "moons": make_moons(n_samples=1500, noise=0.08, random_state=0),
}
fig, axes = plt.subplots(2, 3, figsize=(10, 6.6), layout="constrained")
for row, (name, (X, y)) in enumerate(shapes.items()):
    for col, (title, model) in enumerate(methods(2).items()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SpectralClustering: graph not fully connected
            labels = model.fit_predict(X)
        ax = axes[row, col]
        ax.scatter(X[:, 0], X[:, 1], c=labels, s=3, cmap="coolwarm")
        ax.set_title(f"{name}: {title}\nARI = {adjusted_rand_score(y, labels):.2f}", fontsize=10)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
plt.show()

# %%
# Handwritten digits
# ------------------
# 1,797 images of 8 x 8 pixels, standardised. Each row shows the mean image of
# every cluster a method finds (ordered by the digit most of its images are).
X, y = load_digits(return_X_y=True)
X = StandardScaler().fit_transform(X)
images = load_digits().images

fig, axes = plt.subplots(3, 10, figsize=(10, 3.6), layout="constrained")
fitted = {}
for row, (title, model) in enumerate(methods(10).items()):
    labels = model.fit_predict(X)
    fitted[title] = model
    ari = adjusted_rand_score(y, labels)
    nmi = normalized_mutual_info_score(y, labels)
    print(f"{title:20s} ARI = {ari:.3f}  NMI = {nmi:.3f}")
    majority = [np.bincount(y[labels == j], minlength=10).argmax() for j in range(10)]
    for col, j in enumerate(np.argsort(majority, kind="stable")):
        ax = axes[row, col]
        ax.imshow(images[labels == j].mean(axis=0), cmap="gray_r")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[row, 0].set_ylabel(
        f"{title}\nARI {ari:.2f}", fontsize=8, rotation=0, ha="right", va="center"
    )
plt.show()

# %%
# How t was chosen
# ----------------
# For each candidate t, k-means runs in the kernel's feature space and every
# point is labelled; the partition is scored by its normalised cut of the k-NN
# graph (fewer edges cut between clusters is better), the same yardstick for every
# t. ``t_selection_`` holds the candidates, the kernel's rank and error bound at
# each, and the scores.
heat = fitted["heat (t chosen)"]
print(heat.t_selection_.table())
heat.t_selection_.plot()
plt.show()

# %%
# New points
# ----------
# A model fitted on half of the digits labels the other half: each new image
# joins the fitted graph through its nearest fitted images (Nystroem extension of
# the kernel's eigenvectors). Compare with the labels the same method gives when
# it sees all images.
half = np.arange(len(X)) % 2 == 0
on_half = KernelKMeans(10, kernel="heat", random_state=0).fit(X[half])
predicted = on_half.predict(X[~half])
print(
    f"fitted points predicted again: {np.mean(on_half.predict(X[half]) == on_half.labels_):.3f}"
    " agree with labels_"
)
print(
    f"held-out half vs a fit on all: ARI = "
    f"{adjusted_rand_score(heat.labels_[~half], predicted):.3f}; "
    f"vs the digits: ARI = {adjusted_rand_score(y[~half], predicted):.3f}"
)
