// Moves on to the model page from a page of this origin, so that the
// SameSite=Strict session cookie goes with the request.
window.location.replace("/");
