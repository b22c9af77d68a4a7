//! What a front end serves a client connection over: plain TCP, or TLS
//! over TCP ([`ClientStream`]). The RESP and native connection loops are
//! generic over it, so both protocols run the same code with and without
//! TLS.
//!
//! Besides reading and writing, a stream must be able to move to another
//! worker (`workers`): each worker's runtime has its own epoll, so the TCP
//! socket is taken out of one runtime and registered with the other. A
//! plain socket is nothing but that socket. A TLS stream is the socket
//! plus the session (keys, sequence numbers, buffered records), which is
//! ordinary memory: [`TlsStream`] keeps its socket in a [`Socket`] slot,
//! so that moving takes the socket out of the slot, carries the session
//! along in the resume closure, and puts the re-registered socket back.
//! TLS connections therefore move between workers exactly as plain ones
//! do, between requests with nothing owed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Rebuilds a detached stream around its socket, registered with the
/// runtime of the worker it moved to.
pub type Reattach<S> = Box<dyn FnOnce(TcpStream) -> S + Send>;

/// A client connection's byte stream.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static {
    /// Halves that a connection reads and writes concurrently (RESP reads
    /// requests while its replies are written).
    type ReadHalf: AsyncRead + Unpin + Send;
    type WriteHalf: AsyncWrite + Unpin + Send;

    /// Whether written bytes may wait inside the stream until flushed
    /// (TLS records): a writer must flush after its last write.
    const BUFFERS_WRITES: bool;

    fn split(self) -> (Self::ReadHalf, Self::WriteHalf);

    /// The stream again, from the halves [`ClientStream::split`] made.
    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> Self;

    /// The TCP socket whose bytes are the protocol's own, for spinning
    /// reads straight from it (`spin`); `None` under TLS, where bytes must
    /// go through the session.
    fn raw(&self) -> Option<&TcpStream>;

    /// The same for a read half.
    fn raw_half(read: &Self::ReadHalf) -> Option<&TcpStream>;

    /// Takes the socket out of its runtime to move it to another worker;
    /// the closure rebuilds the stream there.
    fn detach(self) -> io::Result<(std::net::TcpStream, Reattach<Self>)>;
}

impl ClientStream for TcpStream {
    type ReadHalf = OwnedReadHalf;
    type WriteHalf = OwnedWriteHalf;
    const BUFFERS_WRITES: bool = false;

    fn split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }

    fn unsplit(read: OwnedReadHalf, write: OwnedWriteHalf) -> TcpStream {
        read.reunite(write).expect("halves of one stream")
    }

    fn raw(&self) -> Option<&TcpStream> {
        Some(self)
    }

    fn raw_half(read: &OwnedReadHalf) -> Option<&TcpStream> {
        Some(read.as_ref())
    }

    fn detach(self) -> io::Result<(std::net::TcpStream, Reattach<TcpStream>)> {
        Ok((self.into_std()?, Box::new(|s| s)))
    }
}

/// A TLS session over a client's socket (the server's side).
pub type TlsStream = tokio_rustls::server::TlsStream<Socket>;

impl ClientStream for TlsStream {
    type ReadHalf = tokio::io::ReadHalf<TlsStream>;
    type WriteHalf = tokio::io::WriteHalf<TlsStream>;
    const BUFFERS_WRITES: bool = true;

    fn split(self) -> (Self::ReadHalf, Self::WriteHalf) {
        tokio::io::split(self)
    }

    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> TlsStream {
        read.unsplit(write)
    }

    fn raw(&self) -> Option<&TcpStream> {
        None
    }

    fn raw_half(_: &Self::ReadHalf) -> Option<&TcpStream> {
        None
    }

    fn detach(mut self) -> io::Result<(std::net::TcpStream, Reattach<TlsStream>)> {
        let socket = self.get_mut().0.take()?.into_std()?;
        Ok((
            socket,
            Box::new(move |socket| {
                self.get_mut().0 .0 = Some(socket);
                self
            }),
        ))
    }
}

/// The TCP socket under a TLS session, in a slot it can be taken out of
/// (see the module comment). Reading or writing an empty slot is an
/// error; the slot is empty only while the connection moves.
pub struct Socket(Option<TcpStream>);

impl Socket {
    pub fn new(stream: TcpStream) -> Socket {
        Socket(Some(stream))
    }

    fn take(&mut self) -> io::Result<TcpStream> {
        self.0.take().ok_or_else(detached)
    }

    fn get(self: Pin<&mut Self>) -> io::Result<Pin<&mut TcpStream>> {
        match &mut self.get_mut().0 {
            Some(s) => Ok(Pin::new(s)),
            None => Err(detached()),
        }
    }
}

fn detached() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket detached while the connection moves")
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get() {
            Ok(s) => s.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(s) => s.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get() {
            Ok(s) => s.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}
